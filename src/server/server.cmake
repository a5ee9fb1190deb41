# server.cmake - the HTTP server room: engine (slots, scheduler), chat templates, `hotmoe serve`.
# Included by the top-level CMakeLists.txt; defines hm_server and appends it to HM_EXTRA_LIBS.
find_package(Threads REQUIRED)
find_path(CIVETWEB_INCLUDE_DIR civetweb.h)
find_library(CIVETWEB_LIBRARY civetweb)
if(NOT CIVETWEB_INCLUDE_DIR OR NOT CIVETWEB_LIBRARY)
  message(FATAL_ERROR "hotmoe: civetweb not found (Debian: apt install libcivetweb-dev)")
endif()
file(GLOB HM_SERVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/server/*.c)
add_library(hm_server STATIC
  src/engine.c src/engine_backend.c src/chat.c src/chat_parse.c src/cmd_serve.c ${HM_SERVER_SOURCES})
target_include_directories(hm_server PUBLIC src ${CIVETWEB_INCLUDE_DIR})
target_link_libraries(hm_server PUBLIC hm_core PkgConfig::CJSON ${CIVETWEB_LIBRARY} Threads::Threads)
if(TARGET hm_sim)
  target_link_libraries(hm_server PUBLIC hm_sim)   # src/config.c: serve --config
endif()
list(APPEND HM_EXTRA_LIBS hm_server)
