# Guard against one ISA's code running on a CPU without that ISA (a ctest; run it with
#   cmake -DNM=<nm> -DLIBRARY=<liblsa_native.a> [-DCXXFILT=<c++filt>] -P CheckIsaSymbols.cmake).
#
# Each kernel table is compiled once per instruction set (<table>_avx2.cpp with -mavx2, ...). An
# inline function or template instantiation that such a unit emits is a weak symbol; if another
# unit emits the same symbol, the linker keeps ONE copy for all callers, possibly the AVX-512 one
# for the baseline code (a crash on a CPU without it) or a copy assuming another alignment of a
# vector type (seen: std::vector<Vec<T>>). So: no weak symbol defined in an AVX2/AVX-512 unit may
# be defined in any other unit. Fix a hit by giving the code internal linkage in the ISA units
# (LSA_HD_LOCAL for shared recipes, simd::UnitVector for std::vector, an anonymous namespace).
#
# -DVECTOR_ABI_ONLY=ON (unoptimized and sanitizer builds, which emit the standard library's small
# helpers out of line in every unit): only the shared symbols that pass or return a SIMD vector by
# value. Those crash whatever copy the linker keeps: a baseline unit passes a 32-byte vector in
# memory where an AVX unit passes it in a register (seen in a Debug build: a softmax gradient
# recipe, the caller's stack overwritten). Needs CXXFILT.
if(NOT NM OR NOT LIBRARY)
  message(FATAL_ERROR "CheckIsaSymbols: pass -DNM=<nm> and -DLIBRARY=<static library>")
endif()
if(VECTOR_ABI_ONLY AND NOT CXXFILT)
  message(FATAL_ERROR "CheckIsaSymbols: VECTOR_ABI_ONLY needs -DCXXFILT=<c++filt>")
endif()
execute_process(COMMAND "${NM}" -A -P --defined-only "${LIBRARY}"
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "CheckIsaSymbols: ${NM} failed on ${LIBRARY}: ${errors}")
endif()
# "lib.a[member.o]: symbol TYPE value size" -> "member.o symbol TYPE" (no brackets: CMake lists).
string(REGEX REPLACE "[^\n]*\\[([^]\n]*)\\]: ([^ \n]+) ([A-Za-z]) [^\n]*" "\\1 \\2 \\3" listing "${listing}")
string(REPLACE ";" "" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")

set(isa_weak "")  # "member symbol" of each weak symbol of an ISA unit
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^([^ ]+) ([^ ]+) ([A-Za-z])$")
    continue()
  endif()
  set(member "${CMAKE_MATCH_1}")
  set(symbol "${CMAKE_MATCH_2}")
  set(type "${CMAKE_MATCH_3}")
  list(APPEND "defined_in_${symbol}" "${member}")
  if(member MATCHES "_(avx2|avx512)\\.cpp\\.o(bj)?$" AND type MATCHES "^[WVu]$"
     AND NOT symbol STREQUAL "DW.ref.__gxx_personality_v0")  # data: the personality's address
    list(APPEND isa_weak "${member} ${symbol}")
  endif()
endforeach()

# A listing this script cannot read (another nm's format) must fail, not pass with nothing seen.
if(NOT listing MATCHES "_(avx2|avx512)\\.cpp\\.o(bj)? ")
  message(FATAL_ERROR "CheckIsaSymbols: no AVX2/AVX-512 unit found in ${NM}'s listing of ${LIBRARY}")
endif()
set(shared "")
foreach(entry IN LISTS isa_weak)
  string(REPLACE " " ";" parts "${entry}")
  list(GET parts 0 member)
  list(GET parts 1 symbol)
  set(others ${defined_in_${symbol}})
  list(REMOVE_ITEM others "${member}")
  if(others)
    set(name "${symbol}")
    if(CXXFILT)
      execute_process(COMMAND "${CXXFILT}" "${symbol}" OUTPUT_VARIABLE name
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
    endif()
    # By value: a vector parameter ("__vector(4)," or "__vector(4))") or return type (leading).
    if(VECTOR_ABI_ONLY AND NOT name MATCHES "__vector\\([0-9]+\\)[,)]"
       AND NOT name MATCHES "^[a-z ]+ __vector\\([0-9]+\\) ")
      continue()
    endif()
    list(JOIN others ", " others)
    string(APPEND shared "\n  ${name}\n    defined weak in ${member}, also in ${others}")
  endif()
endforeach()
if(shared)
  message(FATAL_ERROR "Weak symbols of an ISA-specific unit shared with other units (the linker "
                      "keeps one copy for all; give them internal linkage):${shared}")
endif()
list(LENGTH isa_weak n)
if(VECTOR_ABI_ONLY)
  message(STATUS "CheckIsaSymbols: ${n} weak symbols in the ISA units, none shared with another "
                 "unit that passes or returns a vector by value")
else()
  message(STATUS "CheckIsaSymbols: ${n} weak symbols in the ISA units, none shared with another unit")
endif()
