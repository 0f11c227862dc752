// `cargo xtask peer references`: llama.cpp (llama-cpp-python 0.3.36's vendored copy), llama-simple -n 24, greedy.
const REFERENCE_TOKENS: usize = 24;
const LLAMA_CPP_Q8_0: &[(&str, &str)] = &[
    ("The capital of France is", " Paris.\n\nThe answer is: 2018-01-22\n\nThe answer is"),
    ("def fibonacci(n):", "\n    if n == 0:\n        return 1\n    return n * fibonacci(n - 1)\n"),
    ("Once upon a time, in a small village,", " there was a wise old woman named Elara. She was a skilled healer and had a special gift – she could"),
];
