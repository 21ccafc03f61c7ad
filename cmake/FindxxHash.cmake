# Finds libxxhash (Debian: libxxhash-dev) and defines the imported target
# xxHash::xxhash. kvkey calls its runtime-dispatched XXH3 entry points
# (xxh_x86dispatch.h), so the header must come with the library.
include(FindPackageHandleStandardArgs)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_xxHash QUIET libxxhash)
endif()
find_path(xxHash_INCLUDE_DIR NAMES xxhash.h HINTS ${PC_xxHash_INCLUDE_DIRS})
find_library(xxHash_LIBRARY NAMES xxhash HINTS ${PC_xxHash_LIBRARY_DIRS})
set(xxHash_VERSION ${PC_xxHash_VERSION})
find_package_handle_standard_args(xxHash REQUIRED_VARS xxHash_LIBRARY xxHash_INCLUDE_DIR VERSION_VAR xxHash_VERSION)
if(xxHash_FOUND AND NOT TARGET xxHash::xxhash)
  add_library(xxHash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxHash::xxhash PROPERTIES
    IMPORTED_LOCATION "${xxHash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${xxHash_INCLUDE_DIR}")
endif()
mark_as_advanced(xxHash_INCLUDE_DIR xxHash_LIBRARY)
