# Install rules (included by the top CMakeLists.txt): the public headers, the
# static and shared libraries (with SOVERSION), the kvq binary, pkg-config
# files (kvq.pc, kvq-engine.pc) and a CMake package (find_package(kvq):
# targets kvq::kvq, kvq::kvq_static, kvq::kvq_engine, kvq::kvq_engine_static).
include(CMakePackageConfigHelpers)

install(TARGETS ${KVQ_INSTALL_TARGETS} EXPORT kvqTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(KVQ_HEADERS ${PROJECT_SOURCE_DIR}/include/kvq.h)
if(KVQ_BUILD_ENGINE)
  list(APPEND KVQ_HEADERS ${PROJECT_SOURCE_DIR}/include/kvq_engine.h)
endif()
if(TARGET kvq_cuda)
  list(APPEND KVQ_HEADERS ${PROJECT_SOURCE_DIR}/include/kvq_cuda.h)
endif()
install(FILES ${KVQ_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KVQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvq)
install(EXPORT kvqTargets NAMESPACE kvq:: DESTINATION ${KVQ_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvqConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvqConfig.cmake INSTALL_DESTINATION ${KVQ_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvqConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvqConfig.cmake ${PROJECT_BINARY_DIR}/kvqConfigVersion.cmake
  DESTINATION ${KVQ_CMAKE_DIR})

# pkg-config: paths relative to the .pc file (${pcfiledir}), so a prefix given to
# cmake --install (or a moved install tree) works; assumes libdir is one level
# below the prefix (lib, lib64)
foreach(pc kvq kvq-engine)
  if(pc STREQUAL "kvq-engine" AND NOT KVQ_BUILD_ENGINE)
    continue()
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
