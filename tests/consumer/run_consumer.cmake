# Installs the flashpage build to <build>/_install, then configures, builds and runs the
# consumer project against that prefix. Run with cmake -P (see tests/CMakeLists.txt).
foreach(var FLASHPAGE_BINARY_DIR CONSUMER_SOURCE_DIR GENERATOR CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: ${var} is not set")
  endif()
endforeach()

set(prefix ${FLASHPAGE_BINARY_DIR}/_install)
set(build ${FLASHPAGE_BINARY_DIR}/_consumer)

function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer: ${step} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE ${prefix} ${build})
run(install ${CMAKE_COMMAND} --install ${FLASHPAGE_BINARY_DIR} --prefix ${prefix}
    --config ${BUILD_TYPE})
run(configure ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
run(build ${CMAKE_COMMAND} --build ${build} --config ${BUILD_TYPE})
run(run ${build}/consumer)
