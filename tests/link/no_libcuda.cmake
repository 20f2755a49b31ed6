# link_needs_no_libcuda: readelf over every library and executable of the project (added at the end of the top
# directory, so targets defined after this file count too): none needs libcuda or libnvrtc. link_ships_alone: the
# libraries and the CLI need no libcrypto either. link_glibc_floor: libjitbmm_c.so (the C++ runtime linked in) loads
# on glibc 2.34.
function(jitbmm_add_link_check)
  set(files)
  foreach(dir ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/tests/fake_driver)
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target ${targets})
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "EXECUTABLE" OR type STREQUAL "SHARED_LIBRARY")
        list(APPEND files $<TARGET_FILE:${target}>)
      endif()
    endforeach()
  endforeach()
  add_test(NAME link_needs_no_libcuda COMMAND bash ${PROJECT_SOURCE_DIR}/tests/link/no_libcuda_needed.sh
           "libcuda\\.so|libnvrtc" ${files})
  set_tests_properties(link_needs_no_libcuda PROPERTIES LABELS host)
  add_test(NAME link_ships_alone COMMAND bash ${PROJECT_SOURCE_DIR}/tests/link/no_libcuda_needed.sh
           "libcuda\\.so|libnvrtc|libcrypto|libssl" $<TARGET_FILE:jitbmm> $<TARGET_FILE:jitbmm_c> $<TARGET_FILE:jitbmm_cli>)
  set_tests_properties(link_ships_alone PROPERTIES LABELS host)
  add_test(NAME link_glibc_floor COMMAND bash ${PROJECT_SOURCE_DIR}/tests/link/glibc_floor.sh $<TARGET_FILE:jitbmm_c>)
  set_tests_properties(link_glibc_floor PROPERTIES LABELS host)
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL jitbmm_add_link_check)
