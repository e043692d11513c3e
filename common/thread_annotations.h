#pragma once
// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
//
// They state which mutex guards a member (GUARDED_BY), which a function needs held
// (REQUIRES) or must not hold (EXCLUDES), and what a lock type acquires and releases.
// clang's -Wthread-safety checks them at compile time (the clang tree, scripts/fuzz.sh,
// makes a violation an error); other compilers see nothing. std::mutex carries no
// annotations in libstdc++, so annotated code locks the wrappers of common/mutex.h.

#if defined(__clang__)
#define FLEETPS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FLEETPS_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (a "capability"), e.g. CAPABILITY("mutex").
#define CAPABILITY(x) FLEETPS_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a capability from construction to destruction.
#define SCOPED_CAPABILITY FLEETPS_THREAD_ANNOTATION(scoped_lockable)
// A data member read or written only with the given mutex held.
#define GUARDED_BY(x) FLEETPS_THREAD_ANNOTATION(guarded_by(x))
// A pointer member whose pointee is read or written only with the given mutex held.
#define PT_GUARDED_BY(x) FLEETPS_THREAD_ANNOTATION(pt_guarded_by(x))
// Mutexes that must be acquired in this order.
#define ACQUIRED_BEFORE(...) FLEETPS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) FLEETPS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// A function called with the given mutexes held (exclusively / shared).
#define REQUIRES(...) FLEETPS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) FLEETPS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// A function that acquires / releases the given mutexes (none named: `this`).
#define ACQUIRE(...) FLEETPS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) FLEETPS_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) FLEETPS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) FLEETPS_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// A function that tries to acquire; the first argument is the return value on success.
#define TRY_ACQUIRE(...) FLEETPS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// A function called without the given mutexes held (it acquires them itself).
#define EXCLUDES(...) FLEETPS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that checks at run time that the given mutex is held.
#define ASSERT_CAPABILITY(x) FLEETPS_THREAD_ANNOTATION(assert_capability(x))
// A function that returns a reference to the given mutex.
#define RETURN_CAPABILITY(x) FLEETPS_THREAD_ANNOTATION(lock_returned(x))
// Turns the analysis off for one function; say why at the function.
#define NO_THREAD_SAFETY_ANALYSIS FLEETPS_THREAD_ANNOTATION(no_thread_safety_analysis)
