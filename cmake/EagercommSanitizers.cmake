# EAGERCOMM_SANITIZE: "" (none) | address (ASan + UBSan) | thread (TSan).
#
# Applied through add_compile_options/add_link_options, so it must be included before the
# first target is created: every target of the project (library, tools, benchmarks, tests) is
# then instrumented, which TSan needs to see every access and ASan needs to own malloc.
# Frame pointers stay on so that the reports' stacks are complete at -O2 too.

include_guard(GLOBAL)

set(_ec_sanitize_doc
  "Sanitizer for every target: empty (none), address (ASan+UBSan) or thread (TSan)")
set(EAGERCOMM_SANITIZE "" CACHE STRING "${_ec_sanitize_doc}")
set_property(CACHE EAGERCOMM_SANITIZE PROPERTY STRINGS "" address thread fuzzer)

string(TOLOWER "${EAGERCOMM_SANITIZE}" _ec_sanitize)
if(_ec_sanitize STREQUAL "asan")
  set(_ec_sanitize address)
elseif(_ec_sanitize STREQUAL "tsan")
  set(_ec_sanitize thread)
endif()

set(EAGERCOMM_SANITIZER_FLAGS "")
if(_ec_sanitize STREQUAL "")
  # No sanitizer.
elseif(_ec_sanitize STREQUAL "address")
  # UBSan normally reports and carries on; recovering would let a test with undefined
  # behaviour pass, so every UBSan finding aborts like an ASan one.
  set(EAGERCOMM_SANITIZER_FLAGS
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
elseif(_ec_sanitize STREQUAL "thread")
  set(EAGERCOMM_SANITIZER_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
elseif(_ec_sanitize STREQUAL "fuzzer")
  # libFuzzer's coverage instrumentation on everything, ASan + UBSan to catch what it finds; the
  # fuzz targets themselves link -fsanitize=fuzzer (tests/fuzz/). clang only.
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "EAGERCOMM_SANITIZE=fuzzer needs clang (the `fuzz` preset sets "
                        "CMAKE_CXX_COMPILER=clang++; apt-get install clang)")
  endif()
  set(EAGERCOMM_SANITIZER_FLAGS -fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
else()
  message(FATAL_ERROR
    "EAGERCOMM_SANITIZE='${EAGERCOMM_SANITIZE}' is not one of: \"\" (none), address, thread, fuzzer.")
endif()
if(NOT "${EAGERCOMM_SANITIZE}" STREQUAL "${_ec_sanitize}")  # normalised "ASan", "tsan", ...
  set(EAGERCOMM_SANITIZE "${_ec_sanitize}" CACHE STRING "${_ec_sanitize_doc}" FORCE)
endif()

if(EAGERCOMM_SANITIZER_FLAGS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    message(FATAL_ERROR
      "EAGERCOMM_SANITIZE=${EAGERCOMM_SANITIZE} needs GCC or Clang, not ${CMAKE_CXX_COMPILER_ID}.")
  endif()
  add_compile_options(${EAGERCOMM_SANITIZER_FLAGS})
  add_link_options(${EAGERCOMM_SANITIZER_FLAGS})
endif()
