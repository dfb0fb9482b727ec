# `cmake --install`: the shared library (with its SONAME link), the public headers, the
# generated build_config.h, the tools, a relocatable CMake package (eagercomm::eagercomm) and
# a relocatable pkg-config file. Include after the library, tools/ and bench/ are defined.
#
# Installed layout (GNUInstallDirs):
#   lib/libeagercomm.so.<version>, .so.<soversion>, .so
#   include/eagercomm/{runtime,collectives,sgd}/<public headers>, eagercomm.h (the C API)
#   bin/eagercomm-info, bin/eagercomm-bench, bin/eagercomm-run   (when those targets exist)
#   <python site dir>/eagercomm/{_core,_torch}*.so + *.py   (python/, when built)
#   lib/cmake/eagercomm/eagercomm{Config,ConfigVersion,Targets*}.cmake
#   lib/pkgconfig/eagercomm.pc
# Headers include each other as "runtime/status.h", so consumers get both include/eagercomm
# (for those) and include (for <eagercomm/runtime/status.h>) on their include path.

include_guard(GLOBAL)

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EAGERCOMM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/eagercomm" CACHE STRING
  "Where the CMake package files are installed, relative to the prefix")
mark_as_advanced(EAGERCOMM_INSTALL_CMAKEDIR)
set(_ec_include_root "${CMAKE_INSTALL_INCLUDEDIR}/eagercomm")

# A sanitized libeagercomm.so only loads into a program linked with the same sanitizer
# runtime (ASan insists on coming first), so installed consumers inherit the link flags.
set(_ec_sanitizer_link_flags ${EAGERCOMM_SANITIZER_FLAGS})
list(FILTER _ec_sanitizer_link_flags INCLUDE REGEX "^-fsanitize=")
foreach(flag IN LISTS _ec_sanitizer_link_flags)
  target_link_options(eagercomm INTERFACE "$<INSTALL_INTERFACE:${flag}>")
endforeach()

set(_ec_libraries eagercomm)
if(TARGET eagercomm_mpi)
  list(APPEND _ec_libraries eagercomm_mpi)  # communicator_from_mpi (collectives/communicator_mpi.h)
endif()
# The eager-SGD core and its data sets (the LibTorch adapter and eagercomm-train are used from
# the build tree for now).
foreach(lib IN ITEMS eagercomm_sgd eagercomm_sgd_data)
  if(TARGET ${lib})
    list(APPEND _ec_libraries ${lib})
  endif()
endforeach()
install(TARGETS ${_ec_libraries} EXPORT eagercommTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    COMPONENT eagercomm_runtime NAMELINK_COMPONENT eagercomm_development
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT eagercomm_development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT eagercomm_runtime
  INCLUDES DESTINATION "${_ec_include_root}" "${CMAKE_INSTALL_INCLUDEDIR}")

# The public headers, and only those: what a program using the C++ API includes, and what they
# include in turn (tests/install/run.sh compiles each installed header on its own, so a public
# header that starts to include an internal one fails there). Every other header is internal,
# whatever its comment says, and stays in the tree: the engine behind Communicator::Impl
# (collectives/communicator_impl.h), the transports, the algorithms.
# The configuration a program passes to Communicator (collectives/config.h's Config) is
# composed of every layer's rows, so those few headers are public too.
set(_ec_public_headers
  runtime/status.h runtime/config.h runtime/config_table.h runtime/memory.h runtime/store.h runtime/file_store.h
  runtime/tcp_store.h runtime/launch_env.h
  transport/transport_config.h transport/verbs/verbs_config.h
  collectives/config.h collectives/collective_config.h
  collectives/dtype.h collectives/communicator.h collectives/partial_allreduce.h)
if(TARGET eagercomm_mpi)
  list(APPEND _ec_public_headers collectives/communicator_mpi.h)
endif()
if(TARGET eagercomm_sgd)
  list(APPEND _ec_public_headers sgd/eager_sgd.h sgd/lr_schedule.h)
endif()
if(TARGET eagercomm_sgd_data)
  list(APPEND _ec_public_headers sgd/data/fashion_mnist.h sgd/data/idx_file.h sgd/data/random.h
    sgd/data/sequence_task.h sgd/data/sharding.h)
endif()
foreach(header IN LISTS _ec_public_headers)
  get_filename_component(dir "${header}" DIRECTORY)
  install(FILES "${PROJECT_SOURCE_DIR}/${header}"
    DESTINATION "${_ec_include_root}/${dir}"
    COMPONENT eagercomm_development)
endforeach()
install(FILES "${EAGERCOMM_GENERATED_DIR}/runtime/build_config.h"
  DESTINATION "${_ec_include_root}/runtime"
  COMPONENT eagercomm_development)

# Installed tools find the library next door without LD_LIBRARY_PATH.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(_ec_tool_rpath "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _ec_bin_to_lib "/prefix/${CMAKE_INSTALL_BINDIR}"
       "/prefix/${CMAKE_INSTALL_LIBDIR}")
  set(_ec_tool_rpath "$ORIGIN/${_ec_bin_to_lib}")
endif()
foreach(tool IN ITEMS eagercomm-info eagercomm-bench eagercomm-run)
  if(TARGET ${tool})
    get_target_property(rpath ${tool} INSTALL_RPATH)
    if(NOT rpath)
      set_target_properties(${tool} PROPERTIES INSTALL_RPATH "${_ec_tool_rpath}")
    endif()
    install(TARGETS ${tool}
      RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT eagercomm_tools)
  endif()
endforeach()

# CMake package: find_package(eagercomm) -> eagercomm::eagercomm.
install(EXPORT eagercommTargets
  NAMESPACE eagercomm::
  FILE eagercommTargets.cmake
  DESTINATION "${EAGERCOMM_INSTALL_CMAKEDIR}"
  COMPONENT eagercomm_development)
configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/eagercommConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/package/eagercommConfig.cmake"
  INSTALL_DESTINATION "${EAGERCOMM_INSTALL_CMAKEDIR}")
# 0.x: a minor release may break the API, so only the same minor version is compatible.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/package/eagercommConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/package/eagercommConfig.cmake"
  "${PROJECT_BINARY_DIR}/package/eagercommConfigVersion.cmake"
  DESTINATION "${EAGERCOMM_INSTALL_CMAKEDIR}"
  COMPONENT eagercomm_development)

# pkg-config: paths relative to ${pcfiledir} so that `cmake --install --prefix <any>` works
# like the CMake package does; absolute GNUInstallDirs paths are kept as they are.
set(_ec_pc_dir "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(EAGERCOMM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(EAGERCOMM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH _ec_pc_to_prefix "/prefix/${_ec_pc_dir}" "/prefix")
  string(REGEX REPLACE "/$" "" _ec_pc_to_prefix "${_ec_pc_to_prefix}")
  set(EAGERCOMM_PC_PREFIX "\${pcfiledir}/${_ec_pc_to_prefix}")
  set(EAGERCOMM_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(EAGERCOMM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(EAGERCOMM_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(EAGERCOMM_PC_LIBS "-L\${libdir} -leagercomm -pthread")
if(_ec_sanitizer_link_flags)
  list(JOIN _ec_sanitizer_link_flags " " _ec_pc_sanitizer)
  string(APPEND EAGERCOMM_PC_LIBS " ${_ec_pc_sanitizer}")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/eagercomm.pc.in"
               "${PROJECT_BINARY_DIR}/package/eagercomm.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/package/eagercomm.pc"
  DESTINATION "${_ec_pc_dir}"
  COMPONENT eagercomm_development)
