// Writes the worked example of docs/FIXTURES.md "Draft trees" with replay_recorder.hpp: one step, one request at
// temperature 1 (seed 7) verifying a tree of three nodes (the root's children 5 and 2, node 0's child 7), V = 8.
// SYNTHETIC: hand-made rows, the tokens the page derives (node 0 rejected, node 1 accepted, then 3 from its row).
//
// Build:  g++ -O1 -std=c++17 -ffp-contract=off -o tree_step examples/cpp_recorder/tree_step.cpp
// Run:    ./tree_step OUT_DIR
// Check:  replay validate OUT_DIR && replay run OUT_DIR --impl reference     (exit 0 both)
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

#include "replay_recorder.hpp"

int main(int argc, char** argv) {
  if (argc < 2) { std::cerr << "usage: tree_step OUT_DIR\n"; return 2; }
  constexpr int64_t V = 8, R = 1, N = 4, K = 3;
  replay::RecordingWriter rec(argv[1], V, R"({"engine": "cpp_recorder tree example", "model": "none"})",
                              /*synthetic=*/true);
  const std::vector<float> probs = {.05f, .05f, .3f, .05f, .05f, .4f, .05f, .05f,   // row 0: the root's
                                    .1f, .1f, .1f, .1f, .1f, .1f, .1f, .3f,         // row 1: node 0's
                                    .05f, .05f, .05f, .5f, .05f, .1f, .1f, .1f,     // row 2: node 1's
                                    .2f, .1f, .1f, .1f, .1f, .1f, .1f, .2f};        // row 3: node 2's
  std::vector<float> logits;
  for (float p : probs) logits.push_back(std::log(p));
  const std::vector<int32_t> cu = {0, 4};
  replay::Step st;
  st.f32("logits", {N, V}, logits);
  st.i32("cu_num_logits", {R + 1}, cu);
  st.i32("draft_token_ids", {N}, {5, 2, 7, -1});  // node i's token on row i; -1 on the bonus row
  st.i64("positions", {N}, {40, 40, 41, 42});     // by depth: 1, 1, 2; the bonus row at 40 + the depth 2
  st.f32("temperature", {R}, {1.0f});
  st.i32("top_k", {R}, {0});
  st.f32("top_p", {R}, {1.0f});
  st.f32("min_p", {R}, {0.0f});
  st.i64("seed", {R}, {7});
  st.i64("request_ids", {R}, {17});
  st.draft_trees({{-1, -1, 0}}, cu);              // verify_method [3], tree_parent [-1, -1, 0, -1]
  st.i32("emitted_tokens", {R, K + 1}, {2, 3, -1, -1});  // the path: node 1 (token 2), then 3 drawn from its row
  st.i32("emitted_counts", {R}, {2});
  st.i8("emitted_routes", {R}, {3});              // stochastic-verify
  std::cout << "step 0 digest " << rec.write_step(st) << "\n";
  rec.close();
  return 0;
}
