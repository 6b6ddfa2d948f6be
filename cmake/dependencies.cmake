# strata's libraries (Debian bookworm packages; launch/setup.sh installs them).
#
# Required: OpenMP, toml++ and nlohmann-json (both header-only here when they
# come from STRATA_VENDOR_DIR/include), GoogleTest for the tests (from source
# in STRATA_VENDOR_DIR/googletest when the package is missing).
#
# Optional, each switched by STRATA_WITH_<NAME> = AUTO (used when found), ON
# (required) or OFF (left out even when installed, to check a build without
# it): oneDNN, HDF5, sentencepiece, MPI, zlib, PCRE2, YAML (yaml-cpp). Where one is left out, the
# sources that need it are replaced by a file that refuses in one line at run
# time (docs/build.md, "Optional features"); its compile definition, where the
# code needs one, sits on the sources that use it only, so every other object
# is the same with and without it.
#
# Defines STRATA_HAVE_ONEDNN, _HDF5, _SENTENCEPIECE, _MPI, _ZLIB, _PCRE2, _YAML
# (ON/OFF), STRATA_ALL_FEATURES (all seven), and the targets strata_deps links.

set(STRATA_VENDOR_DIR "" CACHE PATH
    "Folder with include/ (toml++, nlohmann) and googletest/ sources for a machine without those \
packages (tests/gpu_prepare.sh stages it); when set, its copies are used")

set(STRATA_OPTIONAL_FEATURES ONEDNN HDF5 SENTENCEPIECE MPI ZLIB PCRE2 YAML)
foreach(f ${STRATA_OPTIONAL_FEATURES})
  set(STRATA_WITH_${f} AUTO CACHE STRING "Use ${f}: AUTO (when found), ON (required), OFF (never)")
  set_property(CACHE STRATA_WITH_${f} PROPERTY STRINGS AUTO ON OFF)
endforeach()

# strata_feature(<NAME> <found> <package> <what is lost without it>): the
# decision and its status line; ON and not found stops the configuration.
function(strata_feature name found package lost)
  set(have OFF)
  if(STRATA_WITH_${name} STREQUAL "OFF")
    message(STATUS "strata: ${name} off (STRATA_WITH_${name}=OFF): ${lost}")
  elseif(found)
    set(have ON)
    message(STATUS "strata: ${name} found")
  elseif(STRATA_WITH_${name} STREQUAL "ON")
    message(FATAL_ERROR "strata: STRATA_WITH_${name}=ON but ${name} was not found: install ${package}")
  else()
    message(STATUS "strata: ${name} not found (${package}): ${lost}")
  endif()
  set(STRATA_HAVE_${name} ${have} PARENT_SCOPE)
endfunction()

find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(PkgConfig QUIET)

# oneDNN: the CPU GEMM library (see docs/performance.md, "GEMM library"):
# Debian's libdnnl-dev 2.6, or a oneDNN 3.x in STRATA_ONEDNN_ROOT (include/,
# lib/; cmake/fetch_gemm_libraries.sh onednn3 puts the PyPI wheel's in
# .deps/onednn3). Found by header and library, not through Debian's
# dnnl-config.cmake: that file requires the OpenCL development files (its GPU
# runtime), which the CPU build never uses.
set(STRATA_ONEDNN_ROOT "" CACHE PATH
    "A oneDNN other than the system's (include/ and lib/), e.g. .deps/onednn3")
# The GEMM library under strata's CPU GEMMs (src/backends/cpu/gemm_library.h):
# onednn (the default, the measured winner: docs/performance.md; the system's
# oneDNN or STRATA_ONEDNN_ROOT's), onednn3 (the oneDNN 3.x in .deps/onednn3),
# mkl (oneMKL from STRATA_MKL_ROOT, .deps/mkl) or own (strata's kernels; also
# what onednn falls back to without oneDNN). cmake/fetch_gemm_libraries.sh
# fetches .deps/onednn3 and .deps/mkl from PyPI.
set(STRATA_GEMM_LIBRARY onednn CACHE STRING "The CPU GEMM library: onednn, onednn3, mkl or own")
set_property(CACHE STRATA_GEMM_LIBRARY PROPERTY STRINGS onednn onednn3 mkl own)
if(STRATA_GEMM_LIBRARY STREQUAL "onednn3" AND NOT STRATA_ONEDNN_ROOT)
  set(STRATA_ONEDNN_ROOT "${PROJECT_SOURCE_DIR}/.deps/onednn3")
endif()
set(_found OFF)
if(NOT STRATA_WITH_ONEDNN STREQUAL "OFF")
  if(STRATA_ONEDNN_ROOT)
    # A build folder reconfigured for another oneDNN forgets the one it found.
    string(FIND "${STRATA_DNNL_LIBRARY}" "${STRATA_ONEDNN_ROOT}" _at)
    if(NOT _at EQUAL 0)
      unset(STRATA_DNNL_INCLUDE_DIR CACHE)
      unset(STRATA_DNNL_LIBRARY CACHE)
    endif()
    find_path(STRATA_DNNL_INCLUDE_DIR dnnl.hpp PATHS ${STRATA_ONEDNN_ROOT}/include NO_DEFAULT_PATH)
    find_library(STRATA_DNNL_LIBRARY dnnl PATHS ${STRATA_ONEDNN_ROOT}/lib NO_DEFAULT_PATH)
    if(NOT STRATA_DNNL_INCLUDE_DIR OR NOT STRATA_DNNL_LIBRARY)
      message(FATAL_ERROR "STRATA_ONEDNN_ROOT=${STRATA_ONEDNN_ROOT} has no include/dnnl.hpp and "
                          "lib/libdnnl.so (cmake/fetch_gemm_libraries.sh onednn3 makes .deps/onednn3)")
    endif()
  else()
    find_path(STRATA_DNNL_INCLUDE_DIR dnnl.hpp)
    find_library(STRATA_DNNL_LIBRARY dnnl)
  endif()
  if(STRATA_DNNL_INCLUDE_DIR AND STRATA_DNNL_LIBRARY)
    set(_found ON)
  endif()
endif()
strata_feature(ONEDNN ${_found} libdnnl-dev
  "CPU GEMMs run on strata's own kernels (slower), bf16 GEMMs emulated; no bench/gemm_libraries")
if(STRATA_HAVE_ONEDNN)
  add_library(DNNL::dnnl UNKNOWN IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION "${STRATA_DNNL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${STRATA_DNNL_INCLUDE_DIR}")
  if(STRATA_ONEDNN_ROOT)
    get_filename_component(_dir "${STRATA_DNNL_LIBRARY}" DIRECTORY)
    set_target_properties(DNNL::dnnl PROPERTIES INTERFACE_LINK_OPTIONS
                          "LINKER:--disable-new-dtags,-rpath,${_dir}")
  endif()
endif()

# oneMKL, where cmake/fetch_gemm_libraries.sh put it (STRATA_GEMM_LIBRARY=mkl,
# and tests/gemm_binding_test.cpp wherever it is found).
set(STRATA_MKL_ROOT "${PROJECT_SOURCE_DIR}/.deps/mkl" CACHE PATH
    "oneMKL's include/ and lib/ (cmake/fetch_gemm_libraries.sh mkl)")
set(STRATA_HAVE_MKL OFF)
if(EXISTS "${STRATA_MKL_ROOT}/include/mkl.h" AND EXISTS "${STRATA_MKL_ROOT}/lib/libmkl_core.so")
  set(STRATA_HAVE_MKL ON)
  find_package(OpenMP REQUIRED)
  add_library(strata_mkl INTERFACE IMPORTED GLOBAL)
  set_target_properties(strata_mkl PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${STRATA_MKL_ROOT}/include"
    INTERFACE_LINK_LIBRARIES "${STRATA_MKL_ROOT}/lib/libmkl_intel_lp64.so;${STRATA_MKL_ROOT}/lib/libmkl_gnu_thread.so;${STRATA_MKL_ROOT}/lib/libmkl_core.so;OpenMP::OpenMP_CXX;m;dl"
    INTERFACE_LINK_OPTIONS "LINKER:--disable-new-dtags,-rpath,${STRATA_MKL_ROOT}/lib")
endif()
# STRATA_GEMM_BINDING: which gemm_<binding>.cpp the CPU backend compiles.
if(STRATA_GEMM_LIBRARY STREQUAL "mkl")
  if(NOT STRATA_HAVE_MKL)
    message(FATAL_ERROR "STRATA_GEMM_LIBRARY=mkl but ${STRATA_MKL_ROOT} has no oneMKL "
                        "(run cmake/fetch_gemm_libraries.sh mkl, or set STRATA_MKL_ROOT)")
  endif()
  set(STRATA_GEMM_BINDING mkl)
elseif(STRATA_GEMM_LIBRARY MATCHES "^onednn3?$")
  if(STRATA_HAVE_ONEDNN)
    set(STRATA_GEMM_BINDING onednn)
  elseif(STRATA_GEMM_LIBRARY STREQUAL "onednn3")
    message(FATAL_ERROR "STRATA_GEMM_LIBRARY=onednn3 but oneDNN is off (STRATA_WITH_ONEDNN=OFF)")
  else()
    set(STRATA_GEMM_BINDING own)
  endif()
elseif(STRATA_GEMM_LIBRARY STREQUAL "own")
  set(STRATA_GEMM_BINDING own)
else()
  message(FATAL_ERROR "STRATA_GEMM_LIBRARY=${STRATA_GEMM_LIBRARY}: must be onednn, onednn3, mkl "
                      "or own")
endif()
message(STATUS "strata: CPU GEMM library ${STRATA_GEMM_LIBRARY} (gemm_${STRATA_GEMM_BINDING}.cpp)")

# The header-only libraries: the packages, else (or when STRATA_VENDOR_DIR is
# given) the copies in STRATA_VENDOR_DIR/include.
set(_vendor_include "${STRATA_VENDOR_DIR}/include")
if(STRATA_VENDOR_DIR AND EXISTS "${_vendor_include}/nlohmann/json.hpp")
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES "${_vendor_include}")
  message(STATUS "strata: nlohmann-json from ${_vendor_include}")
else()
  find_package(nlohmann_json 3 QUIET)
  if(NOT nlohmann_json_FOUND)
    message(FATAL_ERROR "nlohmann-json not found: install nlohmann-json3-dev, or give "
                        "-DSTRATA_VENDOR_DIR=<folder> with include/nlohmann (tests/gpu_prepare.sh)")
  endif()
endif()
if(STRATA_VENDOR_DIR AND EXISTS "${_vendor_include}/toml++/toml.h")
  # Header-only mode (toml++'s default): Debian's package is the compiled one.
  add_library(strata_tomlpp INTERFACE)
  target_include_directories(strata_tomlpp SYSTEM INTERFACE "${_vendor_include}")
  add_library(PkgConfig::TOMLPP ALIAS strata_tomlpp)
  message(STATUS "strata: toml++ from ${_vendor_include} (header-only)")
else()
  if(PkgConfig_FOUND)
    pkg_check_modules(TOMLPP QUIET IMPORTED_TARGET tomlplusplus)  # libtomlplusplus-dev
  endif()
  if(NOT TOMLPP_FOUND)
    message(FATAL_ERROR "toml++ not found: install libtomlplusplus-dev, or give "
                        "-DSTRATA_VENDOR_DIR=<folder> with include/toml++ (tests/gpu_prepare.sh)")
  endif()
endif()

set(_found OFF)
if(PkgConfig_FOUND AND NOT STRATA_WITH_SENTENCEPIECE STREQUAL "OFF")
  pkg_check_modules(SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
  set(_found ${SENTENCEPIECE_FOUND})
endif()
strata_feature(SENTENCEPIECE "${_found}" libsentencepiece-dev
  "sentencepiece .model tokenizers cannot be loaded or trained (prepared datasets still train)")

set(_found OFF)
if(PkgConfig_FOUND AND NOT STRATA_WITH_HDF5 STREQUAL "OFF")
  pkg_check_modules(HDF5 QUIET IMPORTED_TARGET hdf5)  # serial
  set(_found ${HDF5_FOUND})
endif()
strata_feature(HDF5 "${_found}" libhdf5-dev
  "checkpoints (.h5) cannot be read or written: train with checkpoint.final = false")

set(_found OFF)
if(NOT STRATA_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)  # Open MPI: the process grid and CPU communicators
  set(_found ${MPI_CXX_FOUND})
endif()
strata_feature(MPI "${_found}" libopenmpi-dev
  "one process only (no mpirun / srun: no data or tensor parallelism)")

set(_found OFF)
if(NOT STRATA_WITH_ZLIB STREQUAL "OFF")
  find_package(ZLIB QUIET)
  set(_found ${ZLIB_FOUND})
endif()
strata_feature(ZLIB "${_found}" zlib1g-dev
  "strata report --png refuses (the HTML report and its SVG charts are still written)")

set(_found OFF)
if(PkgConfig_FOUND AND NOT STRATA_WITH_PCRE2 STREQUAL "OFF")
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)  # regular expressions, UTF-8
  set(_found ${PCRE2_FOUND})
endif()
strata_feature(PCRE2 "${_found}" libpcre2-dev
  "tokenizer.json (byte-level BPE, Llama 3) tokenizers cannot be loaded")

set(_found OFF)
if(PkgConfig_FOUND AND NOT STRATA_WITH_YAML STREQUAL "OFF")
  pkg_check_modules(YAMLCPP QUIET IMPORTED_TARGET yaml-cpp)  # lm-evaluation-harness task YAMLs
  set(_found ${YAMLCPP_FOUND})
endif()
strata_feature(YAML "${_found}" libyaml-cpp-dev
  "strata eval --include-path (lm-evaluation-harness task YAMLs) refuses")

set(STRATA_ALL_FEATURES ON)
foreach(f ${STRATA_OPTIONAL_FEATURES})
  if(NOT STRATA_HAVE_${f})
    set(STRATA_ALL_FEATURES OFF)
  endif()
endforeach()

# What strata_deps links, in the order the full build always had.
set(STRATA_DEP_LIBRARIES OpenMP::OpenMP_CXX)
if(STRATA_GEMM_BINDING STREQUAL "onednn")
  list(APPEND STRATA_DEP_LIBRARIES DNNL::dnnl)
elseif(STRATA_GEMM_BINDING STREQUAL "mkl")
  list(APPEND STRATA_DEP_LIBRARIES strata_mkl)
endif()
list(APPEND STRATA_DEP_LIBRARIES nlohmann_json::nlohmann_json PkgConfig::TOMLPP)
foreach(pair SENTENCEPIECE=PkgConfig::SENTENCEPIECE HDF5=PkgConfig::HDF5 MPI=MPI::MPI_CXX
             ZLIB=ZLIB::ZLIB PCRE2=PkgConfig::PCRE2 YAML=PkgConfig::YAMLCPP)
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 f)
  list(GET pair 1 target)
  if(STRATA_HAVE_${f})
    list(APPEND STRATA_DEP_LIBRARIES ${target})
  endif()
endforeach()
