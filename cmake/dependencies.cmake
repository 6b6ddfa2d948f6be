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

# oneDNN (libdnnl-dev): the CPU GEMM library (see docs/performance.md, "GEMM
# library"). Found by header and library, not through Debian's
# dnnl-config.cmake: that file requires the OpenCL development files (its GPU
# runtime), which the CPU build never uses.
set(_found OFF)
if(NOT STRATA_WITH_ONEDNN STREQUAL "OFF")
  find_path(STRATA_DNNL_INCLUDE_DIR dnnl.hpp)
  find_library(STRATA_DNNL_LIBRARY dnnl)
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
endif()

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
if(STRATA_HAVE_ONEDNN)
  list(APPEND STRATA_DEP_LIBRARIES DNNL::dnnl)
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
