# Layering checks the build enforces (mesh/CMakeLists.txt uses them; tests/layers checks that they fail).
#
# hdp_forbid_dependencies(TARGET <t> [DIRECTORY <dir>] LIBRARIES <lib>... [INCLUDES <text>...])
#   Configuring fails when <t> depends on one of LIBRARIES, directly or through any library it
#   links (LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES, followed transitively once every target of
#   the project exists), or when a source or header under <dir> has an #include line containing
#   one of INCLUDES, or naming a header of one of LIBRARIES: the header beside one of the
#   library's sources, as the project includes it (elastic/elastic_context.h for hdp_elastic's
#   elastic_context.cc). The message names the chain of libraries, or the file and line.
function(hdp_forbid_dependencies)
  cmake_parse_arguments(ARG "" "TARGET;DIRECTORY" "LIBRARIES;INCLUDES" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_LIBRARIES)
    message(FATAL_ERROR "hdp_forbid_dependencies: TARGET and LIBRARIES are required")
  endif()
  if(ARG_DIRECTORY AND ARG_INCLUDES)
    _hdp_check_includes("${ARG_TARGET}" "${ARG_LIBRARIES}" "${ARG_DIRECTORY}" "${ARG_INCLUDES}" "")
  endif()
  # A deferred call's arguments are read when it runs, not here: write the values into it.
  cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]] CALL _hdp_check_layer [[${ARG_TARGET}]] [[${ARG_LIBRARIES}]] [[${ARG_DIRECTORY}]])")
endfunction()

# Fails at the first #include line of a file under `directory` that contains one of `needles`
# (with `owner`: that names one of owner's headers, in quotes).
function(_hdp_check_includes target forbidden directory needles owner)
  file(GLOB_RECURSE _files "${directory}/*.h" "${directory}/*.cc" "${directory}/*.cu")
  foreach(_file IN LISTS _files)
    file(STRINGS "${_file}" _lines REGEX "^[ \t]*#[ \t]*include")
    foreach(_line IN LISTS _lines)
      foreach(_needle IN LISTS needles)
        if(owner)
          string(FIND "${_line}" "\"${_needle}\"" _at)
        else()
          string(FIND "${_line}" "${_needle}" _at)
        endif()
        if(NOT _at EQUAL -1)
          if(owner)
            set(owner ", a header of ${owner},")
          endif()
          message(FATAL_ERROR "layering: ${_file} includes '${_needle}'${owner} (${_line}); "
                              "${target} must not depend on ${forbidden}")
        endif()
      endforeach()
    endforeach()
  endforeach()
endfunction()

# The headers of the project's library `lib` as the project includes them (relative to the top
# source directory): the .h beside each of its sources. None for an imported or unknown target.
function(_hdp_library_headers lib out)
  set(_headers "")
  if(TARGET ${lib})
    get_target_property(_imported ${lib} IMPORTED)
    get_target_property(_sources ${lib} SOURCES)
    get_target_property(_dir ${lib} SOURCE_DIR)
    if(_imported OR NOT _sources)
      set(_sources "")
    endif()
    foreach(_source IN LISTS _sources)
      if(_source MATCHES "^\\$<")
        continue()
      endif()
      cmake_path(ABSOLUTE_PATH _source BASE_DIRECTORY "${_dir}" NORMALIZE)
      cmake_path(REPLACE_EXTENSION _source LAST_ONLY ".h" OUTPUT_VARIABLE _header)
      if(EXISTS "${_header}")
        file(RELATIVE_PATH _relative "${CMAKE_SOURCE_DIR}" "${_header}")
        list(APPEND _headers "${_relative}")
      endif()
    endforeach()
  endif()
  set(${out} "${_headers}" PARENT_SCOPE)
endfunction()

# Run once every target exists: the headers of the forbidden libraries under `directory` (when
# given), then the links.
function(_hdp_check_layer target forbidden directory)
  if(directory)
    foreach(_lib IN LISTS forbidden)
      _hdp_library_headers(${_lib} _headers)
      _hdp_check_includes("${target}" "${forbidden}" "${directory}" "${_headers}" "${_lib}")
    endforeach()
  endif()
  _hdp_check_links("${target}" "${forbidden}")
endfunction()

# Breadth-first over the link graph from `target`; fails at the first forbidden library.
function(_hdp_check_links target forbidden)
  set(_queue "${target}")
  set(_seen "${target}")
  set(_via_${target} "${target}")
  while(_queue)
    list(POP_FRONT _queue _current)
    set(_deps "")
    get_target_property(_type ${_current} TYPE)
    if(NOT _type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(_direct ${_current} LINK_LIBRARIES)
      if(_direct)
        list(APPEND _deps ${_direct})
      endif()
    endif()
    get_target_property(_interface ${_current} INTERFACE_LINK_LIBRARIES)
    if(_interface)
      list(APPEND _deps ${_interface})
    endif()
    foreach(_dep IN LISTS _deps)
      # $<LINK_ONLY:x> is how a static library records its private links.
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _dep "${_dep}")
      if(_dep MATCHES "^\\$<" OR _dep MATCHES "^-")
        continue()
      endif()
      if(_dep IN_LIST forbidden)
        message(FATAL_ERROR "layering: ${target} must not depend on ${_dep}, but links it through "
                            "${_via_${_current}} -> ${_dep}")
      endif()
      if(TARGET ${_dep} AND NOT _dep IN_LIST _seen)
        list(APPEND _seen ${_dep})
        list(APPEND _queue ${_dep})
        set(_via_${_dep} "${_via_${_current}} -> ${_dep}")
      endif()
    endforeach()
  endwhile()
endfunction()
