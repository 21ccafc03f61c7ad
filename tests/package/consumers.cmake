# The consumer programs, shared by the find_package and add_subdirectory projects.
# KVKEY_CONSUMER=core: kvkey::kvkey alone, configured with {fmt} hidden
# (CMAKE_DISABLE_FIND_PACKAGE_fmt), so the core must neither find nor link it.
# KVKEY_CONSUMER=fmt: kvkey::fmt, kvkey/fmt.hpp.
if(KVKEY_CONSUMER STREQUAL "core")
  if(TARGET fmt::fmt OR TARGET kvkey::fmt)
    message(FATAL_ERROR "kvkey without the fmt component brought {fmt} in")
  endif()
  get_target_property(libs kvkey::kvkey INTERFACE_LINK_LIBRARIES)
  if(libs MATCHES "fmt")
    message(FATAL_ERROR "kvkey::kvkey links {fmt}: ${libs}")
  endif()
  add_executable(consumer ${CMAKE_CURRENT_LIST_DIR}/consumer_core.cpp)
  target_link_libraries(consumer PRIVATE kvkey::kvkey)
elseif(KVKEY_CONSUMER STREQUAL "fmt")
  add_executable(consumer ${CMAKE_CURRENT_LIST_DIR}/consumer.cpp)
  target_link_libraries(consumer PRIVATE kvkey::kvkey kvkey::fmt)
else()
  message(FATAL_ERROR "KVKEY_CONSUMER is '${KVKEY_CONSUMER}', not core or fmt")
endif()
enable_testing()
add_test(NAME consumer COMMAND consumer)
