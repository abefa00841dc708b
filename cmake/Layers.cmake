# Layers the build enforces: each library target of src/ exposes only its own headers. For layer L,
# roformer_layer_headers(<target> L) makes ${PROJECT_BINARY_DIR}/include/L/ hold one symlink, L → src/L,
# and gives the target that folder as its PUBLIC include directory: "L/x.h" resolves for the target
# and for whatever links it, and no other src/ folder is visible unless its target is linked too.
# The allowed layer graph itself is checked by scripts/check_layers.py (ctest: layering).

# The include folder holding only the symlink <name> → src/<layer> (folder name <dir>, default <layer>).
function(roformer_layer_include_dir out layer)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "DIR" "")
  if(NOT arg_DIR)
    set(arg_DIR ${layer})
  endif()
  set(dir ${PROJECT_BINARY_DIR}/include/${arg_DIR})
  file(MAKE_DIRECTORY ${dir})
  if(NOT IS_SYMLINK ${dir}/${layer})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${layer} ${dir}/${layer} SYMBOLIC)
  endif()
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

# <target> sees, and exports to its dependents, the headers of src/<layer> and nothing else of src/.
function(roformer_layer_headers target layer)
  roformer_layer_include_dir(dir ${layer})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${dir}>)
endfunction()
