# Included by the top-level CMakeLists.txt when ROFORMER_FUZZ is ON, before the libraries are
# defined: every library is compiled with libFuzzer's coverage instrumentation, AddressSanitizer and
# UBSan (the fuzz targets in fuzz/ then link -fsanitize=fuzzer). Needs clang; with another compiler
# ROFORMER_FUZZ is switched off with a warning. See scripts/fuzz.sh and docs/reliability.md.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(WARNING "ROFORMER_FUZZ needs clang (configure with CC=clang CXX=clang++); fuzz targets are not built")
  set(ROFORMER_FUZZ OFF)
  return()
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -gline-tables-only)
# std::vector reports reads between size() and capacity() (ASan container-overflow).
add_compile_definitions(_GLIBCXX_SANITIZE_VECTOR=1)
add_link_options(-fsanitize=address,undefined)
