# cmake -DNM=nm -DNAMESPACE=avx512 -DOBJECTS="a.o;b.o" -P check_isa_symbols.cmake
#
# Fails when an object compiled for a second instruction set defines a weak
# (COMDAT) symbol outside strata::cpu::<NAMESPACE>: such a symbol also exists
# in the baseline objects, the linker keeps one copy for the whole program, and
# if it kept this one a CPU without the instruction set would crash in it.
foreach(obj IN LISTS OBJECTS)
  execute_process(COMMAND ${NM} -C --defined-only ${obj} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "check_isa_symbols: ${NM} failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${syms}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-f]+ [WVu] (.*)$")
      set(name "${CMAKE_MATCH_1}")
      if(NOT name MATCHES "strata::cpu::${NAMESPACE}::" AND NOT name MATCHES "^DW\\.ref\\.__gxx_personality_v0$")
        message(FATAL_ERROR "${obj}: weak symbol outside strata::cpu::${NAMESPACE}: ${name}\n"
                            "Keep code compiled for ${NAMESPACE} inside its namespace (simd.h), "
                            "and keep library templates out of it.")
      endif()
    endif()
  endforeach()
endforeach()
