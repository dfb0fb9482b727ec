# Optional dependencies: UCX, ibverbs + rdmacm, CUDA, MPI, libtorch.
#
# Each one is a cache STRING EAGERCOMM_WITH_<X> in {AUTO, ON, OFF}:
#   AUTO (default)  use it when found, quietly go without it otherwise;
#   ON              it must be found, or configuration stops naming the Debian package(s);
#   OFF             do not even look.
# A dependency in use gets an INTERFACE IMPORTED target eagercomm::dep_<x> for the code to link
# (link it PRIVATE on `eagercomm` or PUBLIC on an OBJECT library: the installed export set must
# not name these targets), and EAGERCOMM_HAVE_<X> is set to 1 (0 otherwise) for
# runtime/build_config.h. EAGERCOMM_DEP_<X>_DETAIL says what was found or why not, for the
# configure summary.

include_guard(GLOBAL)

find_package(PkgConfig QUIET)

# EAGERCOMM_REQUIRE_ALL=ON (what `make check` and CI configure with): every dependency left at
# AUTO becomes ON, and so do the parts that need no option of their own (the Python package,
# the torch extension, the Gloo baseline): a machine that lacks one fails at configure time,
# naming the Debian package, instead of building and testing less. OFF stays OFF (the sanitizer
# presets turn CUDA and LibTorch off on purpose).
option(EAGERCOMM_REQUIRE_ALL "Fail configuration when any optional part cannot be built" OFF)

# Stops configuration when EAGERCOMM_REQUIRE_ALL is on and `what` cannot be built.
function(eagercomm_require what why packages)
  if(EAGERCOMM_REQUIRE_ALL)
    message(FATAL_ERROR
      "EAGERCOMM_REQUIRE_ALL=ON but ${what} cannot be built: ${why}.\n"
      "Install it with: sudo apt-get install -y ${packages} (deploy/install-deps.sh does)\n"
      "or configure with -DEAGERCOMM_REQUIRE_ALL=OFF to build without it.")
  endif()
endfunction()

set(EAGERCOMM_DEPENDENCIES UCX VERBS CUDA MPI TORCH)
set(EAGERCOMM_DEP_UCX_PACKAGES "libucx-dev")
set(EAGERCOMM_DEP_VERBS_PACKAGES "libibverbs-dev librdmacm-dev")
set(EAGERCOMM_DEP_CUDA_PACKAGES
    "nvidia-cuda-toolkit (non-free; or NVIDIA's toolkit in /usr/local/cuda)")
set(EAGERCOMM_DEP_MPI_PACKAGES "libopenmpi-dev")
set(EAGERCOMM_DEP_TORCH_PACKAGES "libtorch-dev")

# Declares the AUTO/ON/OFF cache entry and normalises its value (on, TRUE, 1 ... are accepted
# because users type them; anything else is a mistake worth stopping for).
function(_eagercomm_dependency_option name doc)
  set(EAGERCOMM_WITH_${name} AUTO CACHE STRING "${doc} (AUTO, ON or OFF)")
  set_property(CACHE EAGERCOMM_WITH_${name} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${EAGERCOMM_WITH_${name}}" mode)
  if((mode STREQUAL "AUTO" OR mode STREQUAL "") AND EAGERCOMM_REQUIRE_ALL)
    set(mode ON)
  elseif(mode STREQUAL "AUTO" OR mode STREQUAL "")
    set(mode AUTO)
  elseif(mode MATCHES "^(ON|YES|TRUE|Y|1)$")
    set(mode ON)
  elseif(mode MATCHES "^(OFF|NO|FALSE|N|0)$")
    set(mode OFF)
  else()
    message(FATAL_ERROR
      "EAGERCOMM_WITH_${name}='${EAGERCOMM_WITH_${name}}' is not one of AUTO, ON, OFF.")
  endif()
  set(_ec_mode_${name} ${mode} PARENT_SCOPE)
endfunction()

# Records the outcome of one detection: ON/OFF, the header macro, the summary text, and the
# configure error when the user demanded a dependency that is not there.
function(_eagercomm_dependency_result name found detail)
  set(mode ${_ec_mode_${name}})
  if(found)
    set(EAGERCOMM_HAVE_${name} 1 PARENT_SCOPE)
    set(EAGERCOMM_DEP_${name} ON PARENT_SCOPE)
  else()
    if(mode STREQUAL "ON")
      message(FATAL_ERROR
        "EAGERCOMM_WITH_${name}=ON (or EAGERCOMM_REQUIRE_ALL=ON) but it was not found: "
        "${detail}.\n"
        "Install it with: sudo apt-get install -y ${EAGERCOMM_DEP_${name}_PACKAGES}\n"
        "or configure with -DEAGERCOMM_WITH_${name}=AUTO (use when present) or OFF.")
    endif()
    set(EAGERCOMM_HAVE_${name} 0 PARENT_SCOPE)
    set(EAGERCOMM_DEP_${name} OFF PARENT_SCOPE)
  endif()
  set(EAGERCOMM_DEP_${name}_DETAIL "${detail}" PARENT_SCOPE)
endfunction()

# Propagates what _eagercomm_dependency_result set in a detection function to its caller.
macro(_eagercomm_dependency_export name)
  set(EAGERCOMM_HAVE_${name} ${EAGERCOMM_HAVE_${name}} PARENT_SCOPE)
  set(EAGERCOMM_DEP_${name} ${EAGERCOMM_DEP_${name}} PARENT_SCOPE)
  set(EAGERCOMM_DEP_${name}_DETAIL "${EAGERCOMM_DEP_${name}_DETAIL}" PARENT_SCOPE)
endmacro()

function(_eagercomm_find_ucx)
  if(_ec_mode_UCX STREQUAL "OFF")
    _eagercomm_dependency_result(UCX FALSE "disabled by EAGERCOMM_WITH_UCX=OFF")
    _eagercomm_dependency_export(UCX)
    return()
  endif()
  # pkg-config knows UCX's full link line (ucp needs uct and ucs); the header + library search
  # covers installs without a .pc file.
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(EAGERCOMM_PC_UCX QUIET IMPORTED_TARGET GLOBAL ucx)
  endif()
  if(EAGERCOMM_PC_UCX_FOUND)
    # A configure that ran before UCX was installed cached the fallback search's NOTFOUND; the
    # fallback is not searched again once pkg-config answers, so those entries would say UCX is
    # missing from a build that has it.
    unset(EAGERCOMM_UCP_INCLUDE_DIR CACHE)
    unset(EAGERCOMM_UCP_LIBRARY CACHE)
    unset(EAGERCOMM_UCS_LIBRARY CACHE)
    add_library(eagercomm::dep_ucx INTERFACE IMPORTED GLOBAL)
    target_link_libraries(eagercomm::dep_ucx INTERFACE PkgConfig::EAGERCOMM_PC_UCX)
    set(where "${EAGERCOMM_PC_UCX_PREFIX}")
    _eagercomm_dependency_result(UCX TRUE
      "ucx ${EAGERCOMM_PC_UCX_VERSION} (pkg-config, prefix ${where})")
    _eagercomm_dependency_export(UCX)
    return()
  endif()
  find_path(EAGERCOMM_UCP_INCLUDE_DIR ucp/api/ucp.h)
  find_library(EAGERCOMM_UCP_LIBRARY ucp)
  find_library(EAGERCOMM_UCS_LIBRARY ucs)
  mark_as_advanced(EAGERCOMM_UCP_INCLUDE_DIR EAGERCOMM_UCP_LIBRARY EAGERCOMM_UCS_LIBRARY)
  if(EAGERCOMM_UCP_INCLUDE_DIR AND EAGERCOMM_UCP_LIBRARY AND EAGERCOMM_UCS_LIBRARY)
    add_library(eagercomm::dep_ucx INTERFACE IMPORTED GLOBAL)
    target_include_directories(eagercomm::dep_ucx INTERFACE "${EAGERCOMM_UCP_INCLUDE_DIR}")
    target_link_libraries(eagercomm::dep_ucx INTERFACE
      "${EAGERCOMM_UCP_LIBRARY}" "${EAGERCOMM_UCS_LIBRARY}")
    _eagercomm_dependency_result(UCX TRUE
      "ucx (headers ${EAGERCOMM_UCP_INCLUDE_DIR}, ${EAGERCOMM_UCP_LIBRARY})")
  else()
    _eagercomm_dependency_result(UCX FALSE
      "no pkg-config module 'ucx' and no ucp/api/ucp.h + libucp + libucs")
  endif()
  _eagercomm_dependency_export(UCX)
endfunction()

function(_eagercomm_find_verbs)
  if(_ec_mode_VERBS STREQUAL "OFF")
    _eagercomm_dependency_result(VERBS FALSE "disabled by EAGERCOMM_WITH_VERBS=OFF")
    _eagercomm_dependency_export(VERBS)
    return()
  endif()
  # Headers only: libeagercomm loads libibverbs.so.1 and librdmacm.so.1 at run time
  # (transport/verbs/verbs_api.h), so it links against neither and loads without rdma-core.
  find_path(EAGERCOMM_VERBS_INCLUDE_DIR infiniband/verbs.h)
  find_path(EAGERCOMM_RDMACM_INCLUDE_DIR rdma/rdma_cma.h)
  mark_as_advanced(EAGERCOMM_VERBS_INCLUDE_DIR EAGERCOMM_RDMACM_INCLUDE_DIR)
  set(missing "")
  foreach(var IN ITEMS VERBS_INCLUDE_DIR RDMACM_INCLUDE_DIR)
    if(NOT EAGERCOMM_${var})
      list(APPEND missing ${var})
    endif()
  endforeach()
  if(missing)
    string(REPLACE "VERBS_INCLUDE_DIR" "infiniband/verbs.h" missing "${missing}")
    string(REPLACE "RDMACM_INCLUDE_DIR" "rdma/rdma_cma.h" missing "${missing}")
    string(REPLACE ";" ", " missing "${missing}")
    _eagercomm_dependency_result(VERBS FALSE "missing ${missing}")
    _eagercomm_dependency_export(VERBS)
    return()
  endif()
  add_library(eagercomm::dep_verbs INTERFACE IMPORTED GLOBAL)
  target_include_directories(eagercomm::dep_verbs INTERFACE
    "${EAGERCOMM_VERBS_INCLUDE_DIR}" "${EAGERCOMM_RDMACM_INCLUDE_DIR}")
  target_link_libraries(eagercomm::dep_verbs INTERFACE ${CMAKE_DL_LIBS})
  # The version is only for the summary: rdma-core ships .pc files, other stacks may not.
  set(version "")
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(EAGERCOMM_PC_VERBS QUIET libibverbs)
    if(EAGERCOMM_PC_VERBS_FOUND)
      set(version " ${EAGERCOMM_PC_VERBS_VERSION}")
    endif()
  endif()
  _eagercomm_dependency_result(VERBS TRUE
    "libibverbs${version} headers; libibverbs.so.1 and librdmacm.so.1 loaded at run time")
  _eagercomm_dependency_export(VERBS)
endfunction()

# Detection only: the CUDA language is not enabled and nothing here needs a GPU.
function(_eagercomm_find_cuda)
  if(_ec_mode_CUDA STREQUAL "OFF")
    _eagercomm_dependency_result(CUDA FALSE "disabled by EAGERCOMM_WITH_CUDA=OFF")
    _eagercomm_dependency_export(CUDA)
    return()
  endif()
  # FindCUDAToolkit searches CUDAToolkit_ROOT, PATH and /usr/local/cuda for nvcc.
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart_static)
    add_library(eagercomm::dep_cuda INTERFACE IMPORTED GLOBAL)
    # Static: the runtime then loads the driver (libcuda.so.1) itself when first used, so the
    # library starts on machines without a driver, where the CUDA calls report "no driver".
    target_link_libraries(eagercomm::dep_cuda INTERFACE CUDA::cudart_static)
    _eagercomm_dependency_result(CUDA TRUE
      "CUDA ${CUDAToolkit_VERSION} (nvcc ${CUDAToolkit_NVCC_EXECUTABLE})")
  elseif(CUDAToolkit_FOUND)
    _eagercomm_dependency_result(CUDA FALSE
      "toolkit at ${CUDAToolkit_BIN_DIR} has no static libcudart")
  else()
    _eagercomm_dependency_result(CUDA FALSE
      "no CUDA toolkit (nvcc not in /usr/local/cuda/bin, CUDAToolkit_ROOT or PATH)")
  endif()
  _eagercomm_dependency_export(CUDA)
endfunction()

function(_eagercomm_find_mpi)
  if(_ec_mode_MPI STREQUAL "OFF")
    _eagercomm_dependency_result(MPI FALSE "disabled by EAGERCOMM_WITH_MPI=OFF")
    _eagercomm_dependency_export(MPI)
    return()
  endif()
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    add_library(eagercomm::dep_mpi INTERFACE IMPORTED GLOBAL)
    target_link_libraries(eagercomm::dep_mpi INTERFACE MPI::MPI_C)
    # eagercomm is C++ but links only the C library: without these, <mpi.h> compiled as C++
    # declares the deprecated MPI C++ bindings, which need libmpi_cxx at link time.
    target_compile_definitions(eagercomm::dep_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
    # The library path names the implementation (.../openmpi/lib/libmpi.so); asking for its
    # version string would cost a test program run (MPI_DETERMINE_LIBRARY_VERSION).
    set(where "")
    if(MPI_C_LIBRARIES)
      list(GET MPI_C_LIBRARIES 0 where)
    endif()
    if(MPIEXEC_EXECUTABLE)
      string(APPEND where ", ${MPIEXEC_EXECUTABLE}")
    endif()
    string(REGEX REPLACE "^, " "" where "${where}")
    _eagercomm_dependency_result(MPI TRUE "MPI ${MPI_C_VERSION} (${where})")
  else()
    _eagercomm_dependency_result(MPI FALSE "find_package(MPI COMPONENTS C) found no C MPI")
  endif()
  _eagercomm_dependency_export(MPI)
endfunction()

function(_eagercomm_find_torch)
  if(_ec_mode_TORCH STREQUAL "OFF")
    _eagercomm_dependency_result(TORCH FALSE "disabled by EAGERCOMM_WITH_TORCH=OFF")
    _eagercomm_dependency_export(TORCH)
    return()
  endif()
  # TorchConfig.cmake pulls in Caffe2, gflags, glog, protobuf and MKL probing, which is slow
  # and noisy; look for the config file first so that an absent libtorch costs one search.
  # Debian's libtorch-dev puts it in /usr/lib/<multiarch>/cmake/Torch; pip wheels put it in
  # site-packages/torch/share/cmake/Torch (found via CMAKE_PREFIX_PATH or Torch_DIR).
  file(GLOB pip_hints
    /usr/lib/python3*/dist-packages/torch/share/cmake/Torch
    /usr/local/lib/python3*/dist-packages/torch/share/cmake/Torch
    /usr/local/lib/python3*/site-packages/torch/share/cmake/Torch)
  if(EAGERCOMM_TORCH_CONFIG AND NOT EXISTS "${EAGERCOMM_TORCH_CONFIG}")
    unset(EAGERCOMM_TORCH_CONFIG CACHE)  # uninstalled since the last configure
  endif()
  find_file(EAGERCOMM_TORCH_CONFIG NAMES TorchConfig.cmake torch-config.cmake
    HINTS "${Torch_DIR}" ENV Torch_DIR ${pip_hints}
    PATH_SUFFIXES lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake/Torch lib/cmake/Torch
                  share/cmake/Torch)
  mark_as_advanced(EAGERCOMM_TORCH_CONFIG)
  if(NOT EAGERCOMM_TORCH_CONFIG)
    _eagercomm_dependency_result(TORCH FALSE
      "no TorchConfig.cmake (set Torch_DIR for a pip libtorch)")
    _eagercomm_dependency_export(TORCH)
    return()
  endif()
  get_filename_component(config_dir "${EAGERCOMM_TORCH_CONFIG}" DIRECTORY)
  # Caffe2's config prints STATUS lines even when QUIET; the summary says what matters.
  if(NOT DEFINED CMAKE_MESSAGE_LOG_LEVEL)
    set(CMAKE_MESSAGE_LOG_LEVEL NOTICE)  # function scope: only for this find_package
  endif()
  find_package(Torch QUIET HINTS "${config_dir}")
  unset(CMAKE_MESSAGE_LOG_LEVEL)
  if(NOT Torch_FOUND OR NOT TORCH_LIBRARIES)
    _eagercomm_dependency_result(TORCH FALSE "find_package(Torch) failed using ${config_dir}")
    _eagercomm_dependency_export(TORCH)
    return()
  endif()
  add_library(eagercomm::dep_torch INTERFACE IMPORTED GLOBAL)
  target_link_libraries(eagercomm::dep_torch INTERFACE ${TORCH_LIBRARIES})
  if(TORCH_INCLUDE_DIRS)
    target_include_directories(eagercomm::dep_torch INTERFACE ${TORCH_INCLUDE_DIRS})
  endif()
  set(version "")
  foreach(var IN ITEMS Torch_VERSION CAFFE2_VERSION)
    if(${var})
      set(version " ${${var}}")
      break()
    endif()
  endforeach()
  _eagercomm_dependency_result(TORCH TRUE "libtorch${version} (${config_dir})")
  _eagercomm_dependency_export(TORCH)
endfunction()

_eagercomm_dependency_option(UCX "Use UCX (ucp) as a transport backend")
_eagercomm_dependency_option(VERBS "Use ibverbs + rdmacm as a transport backend")
_eagercomm_dependency_option(CUDA "Detect the CUDA toolkit for device-memory support")
_eagercomm_dependency_option(MPI "Use MPI for bootstrap and as a comparison baseline")
_eagercomm_dependency_option(TORCH "Build the PyTorch (libtorch) integration")

_eagercomm_find_ucx()
_eagercomm_find_verbs()
_eagercomm_find_cuda()
_eagercomm_find_mpi()
_eagercomm_find_torch()
