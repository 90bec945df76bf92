# Injected into the llama.cpp sdist build with -DCMAKE_PROJECT_INCLUDE (envs.py): build only the programs
# the pipeline runs (llama-server, llama-quantize, llama-bench, and llama-perplexity for the divergence pass)
# and the libraries they link. Every other
# target of the sdist (other tools, their -impl libraries, the unified app) leaves the default target.
get_property(_stackbench_done GLOBAL PROPERTY STACKBENCH_TARGETS_DEFERRED)
if(NOT _stackbench_done)
  set_property(GLOBAL PROPERTY STACKBENCH_TARGETS_DEFERRED TRUE)

  # The kept programs and everything they link, followed through LINK_LIBRARIES.
  function(_stackbench_needed out)
    set(needed "")
    set(queue llama-server llama-quantize llama-bench llama-perplexity)
    while(queue)
      list(POP_FRONT queue target)
      if(TARGET ${target} AND NOT target IN_LIST needed)
        list(APPEND needed ${target})
        get_target_property(libs ${target} LINK_LIBRARIES)
        if(libs)
          list(APPEND queue ${libs})
        endif()
      endif()
    endwhile()
    set(${out} ${needed} PARENT_SCOPE)
  endfunction()

  function(_stackbench_exclude dir needed)
    get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT target IN_LIST needed)
        set_target_properties(${target} PROPERTIES EXCLUDE_FROM_ALL TRUE)
      endif()
    endforeach()
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    foreach(sub IN LISTS subdirs)
      _stackbench_exclude("${sub}" "${needed}")
    endforeach()
  endfunction()

  function(_stackbench_only_needed)
    _stackbench_needed(needed)
    _stackbench_exclude("${CMAKE_SOURCE_DIR}" "${needed}")
  endfunction()

  # Deferred to the end of the top-level directory, when every target exists.
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _stackbench_only_needed)
endif()
