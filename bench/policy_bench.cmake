# policy_bench: policy decisions against workflows of 10..10,000 mixed rules (Google Benchmark).
add_executable(policy_bench ${CMAKE_CURRENT_LIST_DIR}/policy_bench.cpp)
target_link_libraries(policy_bench PRIVATE sluice::policy benchmark::benchmark)
# BM_ShadowRequest times the proxy's shadow decision of a row (proxy/src/shadow.hpp).
target_link_libraries(policy_bench PRIVATE sluice::proxy)
target_include_directories(policy_bench PRIVATE ${CMAKE_SOURCE_DIR}/proxy/src)
