# CTest `install_consumer`: installs this build into a temporary prefix and builds and runs
# tests/install (a separate project) against it, through find_package and through pkg-config.
# It catches what in-tree tests cannot: a header missing from the install, a broken export set,
# wrong include directories, a pkg-config file that does not resolve. Include after tests/.

include_guard(GLOBAL)

find_program(EAGERCOMM_BASH bash)
mark_as_advanced(EAGERCOMM_BASH)
if(NOT EAGERCOMM_BASH)
  message(STATUS "install_consumer test skipped: no bash")
  return()
endif()

add_test(NAME install_consumer
  COMMAND "${EAGERCOMM_BASH}" "${PROJECT_SOURCE_DIR}/tests/install/run.sh" "${PROJECT_BINARY_DIR}")
# The consumers are built with this build's cmake and compilers (not EAGERCOMM_* names: the
# ranks the test starts would warn about unknown EAGERCOMM_* variables), so that a build configured with
# another toolchain is tested with it.
set_tests_properties(install_consumer PROPERTIES
  LABELS install
  TIMEOUT 600
  ENVIRONMENT "EC_INSTALL_CMAKE=${CMAKE_COMMAND};EC_INSTALL_CXX=${CMAKE_CXX_COMPILER};EC_INSTALL_CC=${CMAKE_C_COMPILER}")
