#pragma once
// Prometheus metrics (prometheus-cpp core; used only here): counters, gauges and
// histograms in a Registry, written in the Prometheus text exposition format. The
// composition roots own a Registry and hand the metric handles to what they measure;
// common/net/http_endpoint.h serves Serialize() as /metrics.
// Thread-safety: handles may be updated from any thread (atomic); GetX and Serialize may
// be called concurrently. Handles stay valid for the Registry's lifetime.

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace fleetps::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  Counter() = default;  // a no-op handle
  explicit Counter(prometheus::Counter* c) : c_(c) {}
  void Increment(double by = 1) const;
  double value() const;

 private:
  prometheus::Counter* c_ = nullptr;
};

class Gauge {
 public:
  Gauge() = default;
  explicit Gauge(prometheus::Gauge* g) : g_(g) {}
  void Set(double v) const;
  double value() const;

 private:
  prometheus::Gauge* g_ = nullptr;
};

class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(prometheus::Histogram* h) : h_(h) {}
  void Observe(double v) const;

 private:
  prometheus::Histogram* h_ = nullptr;
};

// Exponential bucket bounds: start, start*factor, ... (count of them).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Get-or-create the series `name{labels}`; `help` describes the family (first use wins).
  // A name used with two metric types is a programming error (CHECK).
  Counter GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram GetHistogram(const std::string& name, const std::string& help, const Labels& labels,
                         const std::vector<double>& buckets);

  // Every series, in the text exposition format (version 0.0.4), after the standard
  // process_* series of this process (common/metrics/process_metrics.h).
  std::string Serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The Content-Type of Serialize()'s output.
inline constexpr char kTextFormatContentType[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace fleetps::metrics
