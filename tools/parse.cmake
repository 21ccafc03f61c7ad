# The kvkey tool's input parsers (identity files, token files, the escaping of
# what messages quote) as a static library: linked by the tool, and built again
# with the sanitizer flags by its fuzz target (tests/fuzz, which the fuzz stage
# configures without the tools).
#
#   kvkey_tool_parse_library(<name>)
function(kvkey_tool_parse_library name)
  find_package(nlohmann_json 3.10 REQUIRED)
  find_package(tomlplusplus 3 REQUIRED)
  set(dir ${PROJECT_SOURCE_DIR}/tools)
  add_library(${name} STATIC
    ${dir}/cli/identity_config.cpp
    ${dir}/cli/inputs.cpp
    ${dir}/cli/text.cpp
    ${dir}/cli/toml_config.cpp)
  target_include_directories(${name} PUBLIC ${dir})
  target_link_libraries(${name} PUBLIC kvkey::kvkey kvkey::fmt nlohmann_json::nlohmann_json tomlplusplus::tomlplusplus)
  if(COMMAND kvkey_strict_warnings)
    kvkey_strict_warnings(${name})
  endif()
endfunction()
