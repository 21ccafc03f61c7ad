# kvkey_strict_warnings(<target>): the warning set every kvkey translation unit
# builds with (-Wall -Wextra -Wpedantic, and -Werror with KVKEY_WARNINGS_AS_ERRORS).
option(KVKEY_WARNINGS_AS_ERRORS "Treat warnings as errors in kvkey's own targets" OFF)
function(kvkey_strict_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow)
  if(KVKEY_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
