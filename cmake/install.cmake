# `cmake --install build --prefix P` (make install PREFIX=P): the layer libraries under P/lib, the
# C++ API headers (src/**.h) under P/include/pypto, the kernel headers under P/include/pto (where
# the CPU backend finds them at run time: beside P/bin/ptoc, or via PYPTO_INCLUDE_DIR), ptoc under
# P/bin, and P/lib/cmake/pypto/pyptoConfig.cmake, so that a project does
#   find_package(pypto REQUIRED)  target_link_libraries(app PRIVATE pypto::pypto)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PYPTO_INSTALL_LAYERS pypto_target pypto_ir pypto_passes pypto_exec pypto_interp pypto_sim pypto_cpu_codegen
                         pypto_runtime)
install(TARGETS ${PYPTO_INSTALL_LAYERS} pypto_pto_headers pypto_core EXPORT pyptoTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pypto
        FILES_MATCHING PATTERN "*.h" PATTERN "bindings" EXCLUDE)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/pto DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/cmake/installed_headers.cpp DESTINATION ${CMAKE_INSTALL_DATADIR}/pypto)
if(TARGET ptoc)
  install(TARGETS ptoc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# pypto::pypto: every layer, for a program that lowers, compiles and runs kernels.
install(EXPORT pyptoTargets NAMESPACE pypto:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pypto)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/pyptoConfig.cmake.in [=[
@PACKAGE_INIT@
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include("${CMAKE_CURRENT_LIST_DIR}/pyptoTargets.cmake")
if(NOT TARGET pypto::pypto)
  add_library(pypto::pypto INTERFACE IMPORTED)
  set_target_properties(pypto::pypto PROPERTIES
    INTERFACE_LINK_LIBRARIES pypto::pypto_core
    INTERFACE_SOURCES "${PACKAGE_PREFIX_DIR}/@CMAKE_INSTALL_DATADIR@/pypto/installed_headers.cpp"
    INTERFACE_COMPILE_DEFINITIONS "PYPTO_INSTALLED_HEADERS=\"${PACKAGE_PREFIX_DIR}/@CMAKE_INSTALL_INCLUDEDIR@\"")
endif()
]=])
configure_package_config_file(${CMAKE_CURRENT_BINARY_DIR}/pyptoConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/pyptoConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pypto)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pyptoConfigVersion.cmake
                                 VERSION 0.1.0 COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pyptoConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/pyptoConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pypto)
