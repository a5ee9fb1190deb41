# placement/: pure decisions (cache policies, exchange, simulator, synthetic routing, cost model).
# Included by the top-level CMakeLists.txt before the hotmoe executable; shares its scope.
file(GLOB HM_PLACEMENT_SOURCES ${CMAKE_CURRENT_LIST_DIR}/*.c)
add_library(hm_placement STATIC ${HM_PLACEMENT_SOURCES})
target_include_directories(hm_placement PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(hm_placement PUBLIC ${MATH_LIB})

# src-side pieces of the planner room: trace files, the simulate, plan and calibrate commands, and
# deployment config files (src/config.c).
add_library(hm_sim STATIC ${CMAKE_SOURCE_DIR}/src/trace.c ${CMAKE_SOURCE_DIR}/src/cmd_simulate.c
  ${CMAKE_SOURCE_DIR}/src/cmd_plan.c ${CMAKE_SOURCE_DIR}/src/config.c
  ${CMAKE_SOURCE_DIR}/src/routeio.c)
target_link_libraries(hm_sim PUBLIC hm_placement hm_core)

list(APPEND HM_EXTRA_LIBS hm_sim hm_placement)
