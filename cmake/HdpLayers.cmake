# Layering checks the build enforces (mesh/CMakeLists.txt uses them; tests/build checks that they fail).
#
# hdp_forbid_dependencies(TARGET <t> [DIRECTORY <dir>] LIBRARIES <lib>... [INCLUDES <text>...])
#   Configuring fails when <t> depends on one of LIBRARIES, directly or through any library it
#   links (LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES, followed transitively once every target of
#   the project exists), or when a source or header under <dir> has an #include line containing
#   one of INCLUDES. The message names the chain of libraries, or the file and line.
function(hdp_forbid_dependencies)
  cmake_parse_arguments(ARG "" "TARGET;DIRECTORY" "LIBRARIES;INCLUDES" ${ARGN})
  if(NOT ARG_TARGET OR NOT ARG_LIBRARIES)
    message(FATAL_ERROR "hdp_forbid_dependencies: TARGET and LIBRARIES are required")
  endif()
  if(ARG_DIRECTORY AND ARG_INCLUDES)
    file(GLOB_RECURSE _files "${ARG_DIRECTORY}/*.h" "${ARG_DIRECTORY}/*.cc" "${ARG_DIRECTORY}/*.cu")
    foreach(_file IN LISTS _files)
      file(STRINGS "${_file}" _lines REGEX "^[ \t]*#[ \t]*include")
      foreach(_line IN LISTS _lines)
        foreach(_needle IN LISTS ARG_INCLUDES)
          string(FIND "${_line}" "${_needle}" _at)
          if(NOT _at EQUAL -1)
            message(FATAL_ERROR "layering: ${_file} includes '${_needle}' (${_line}); "
                                "${ARG_TARGET} must not depend on ${ARG_LIBRARIES}")
          endif()
        endforeach()
      endforeach()
    endforeach()
  endif()
  # A deferred call's arguments are read when it runs, not here: write the values into it.
  cmake_language(EVAL CODE
    "cmake_language(DEFER DIRECTORY [[${CMAKE_SOURCE_DIR}]] CALL _hdp_check_links [[${ARG_TARGET}]] [[${ARG_LIBRARIES}]])")
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
