# token_bench: the per-request cost of a bearer token minted at the proxy when it is cached
# (the pipeline step and the cache lookup; Google Benchmark). Uses the proxy's private headers.
add_executable(token_bench ${CMAKE_CURRENT_LIST_DIR}/token_bench.cpp)
target_include_directories(token_bench PRIVATE ${PROJECT_SOURCE_DIR}/proxy/src)
target_link_libraries(token_bench PRIVATE sluice::proxy sluice::policy Boost::system
                      benchmark::benchmark Threads::Threads)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # The coroutine frame false positive of proxy/CMakeLists.txt.
  target_compile_options(token_bench PRIVATE -Wno-mismatched-new-delete)
endif()
