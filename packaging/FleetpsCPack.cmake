# CPack: `cpack -G DEB` (fleetps_<version>_<arch>.deb, installing under /usr) and
# `cpack -G TGZ` (fleetps-<version>-Linux.tar.gz, the same tree relative to a prefix).
# Included last by the top-level CMakeLists.txt.
set(CPACK_PACKAGE_NAME fleetps)
set(CPACK_PACKAGE_VENDOR "fleetps")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Parameter-server training for sparse-embedding CTR models")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "fleetps maintainers <fleetps@localhost>")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_PACKAGE_FILE_NAME "fleetps-${PROJECT_VERSION}-Linux")
set(CPACK_STRIP_FILES ON)
# Both packages hold the /usr tree (the DEB generator stages with DESTDIR; the TGZ one
# with a staging prefix, which packaging/CMakeLists.txt strips from the units' paths).
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from the binaries' shared libraries
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # fast on small CI machines
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_SOURCE_DIR}/packaging/debian/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
