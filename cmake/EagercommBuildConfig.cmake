# Generates runtime/build_config.h (version, build type, sanitizer, EAGERCOMM_HAVE_*) into
# ${EAGERCOMM_GENERATED_DIR}, a folder of the build tree that mirrors the source layout, so the
# code includes it as "runtime/build_config.h" both in the build and once installed.
# Include after EagercommSanitizers and EagercommDependencies, which set what it records.

include_guard(GLOBAL)

set(EAGERCOMM_GENERATED_DIR "${PROJECT_BINARY_DIR}/generated")
set(EAGERCOMM_BUILD_TYPE "${CMAKE_BUILD_TYPE}")
foreach(dep IN LISTS EAGERCOMM_DEPENDENCIES)
  if(NOT DEFINED EAGERCOMM_HAVE_${dep})
    message(FATAL_ERROR "EagercommBuildConfig: EAGERCOMM_HAVE_${dep} unset; include "
                        "EagercommDependencies first.")
  endif()
endforeach()
# configure_file rewrites the header only when its text changes, so reconfiguring does not
# rebuild everything that includes it.
configure_file("${PROJECT_SOURCE_DIR}/runtime/build_config.h.in"
               "${EAGERCOMM_GENERATED_DIR}/runtime/build_config.h" @ONLY)
