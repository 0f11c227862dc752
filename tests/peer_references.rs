// `cargo xtask peer references`: llama.cpp (llama-cpp-python 0.3.36's vendored copy), llama-simple -n 24, greedy.
const REFERENCE_TOKENS: usize = 24;
const LLAMA_CPP_Q8_0: &[(&str, &str)] = &[
    ("The capital of France is", " Paris.\n\nThe answer is: 2018-01-22\n\nThe answer is"),
    ("def fibonacci(n):", "\n    if n == 0:\n        return 1\n    return n * fibonacci(n - 1)\n"),
    ("Once upon a time, in a small village,", " there was a wise old woman named Elara. She was a skilled healer and had a special gift – she could"),
];
// Gemma 3 270M (Q4_K_M, the file as downloaded), printed by the same step on
// 2026-12-07 on an AMD EPYC of family 25 model 17. llama.cpp's greedy
// choices depend on the host's SIMD paths near ties: the same step there
// printed other SmolLM2 continuations than the ones above (" Paris.\n\nThe
// answer is: 2018-01-22 12:1", " there was a wise old wizard named
// Elwes…"), so a constant is pinned, not regenerated per host.
const LLAMA_CPP_GEMMA3: &[(&str, &str)] = &[
    ("The capital of France is", " the capital of the country of France. It is the largest city in France. It is the capital of the country of"),
    ("def fibonacci(n):", "\n    if n == 0:\n        return 0\n    elif n == 1:\n        return"),
    ("Once upon a time, in a small village,", " there lived a family of four. They were very happy. They had a lot of money, and they had a lot"),
];
