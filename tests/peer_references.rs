// `cargo xtask peer references`: llama.cpp (llama-cpp-python 0.3.36's vendored copy), llama-simple -n 24, greedy.
// Host: AMD EPYC, family 25 model 17.
// A row: the prompt, llama.cpp's greedy continuation, and the tokens it decoded — fewer than REFERENCE_TOKENS when its next greedy choice was an end-of-generation token.
const REFERENCE_TOKENS: usize = 24;
const LLAMA_CPP_Q8_0: &[(&str, &str, usize)] = &[
    ("The capital of France is", " Paris.\n\nThe answer is: 2018-01-22 12:1", 24),
    ("def fibonacci(n):", "\n    if n == 0:\n        return 1\n    return n * fibonacci(n - 1)\n", 24),
    ("Once upon a time, in a small village,", " there was a wise old wizard named Elwes. Elwes was a master of magic and had a special", 24),
];
const LLAMA_CPP_Q4_K_M: &[(&str, &str, usize)] = &[
    ("The capital of France is", " Paris.\n\nThe answer is: 2.", 11),
    ("def fibonacci(n):", "\n    max_num = 10\n    while True i = 2:\n        if i % 2 == ", 24),
    ("Once upon a time, in a small village,", " there was a wise old wizard named Elwendi. Elwendi was known for her magical abilities and", 24),
];
const LLAMA_CPP_Q5_0: &[(&str, &str, usize)] = &[
    ("The capital of France is", " Paris.", 2),
    ("def fibonacci(n):", "\n    max_num = max(range(1, n + 1))\n    return max_num\n\nprint", 24),
    ("Once upon a time, in a small village,", " there was a blacksmith named Grimbold. He was known for his exceptional craftsmanship and was always working on something new and exciting", 24),
];
const LLAMA_CPP_GEMMA3: &[(&str, &str, usize)] = &[
    ("The capital of France is", " the capital of the country of France. It is the largest city in France. It is the capital of the country of", 24),
    ("def fibonacci(n):", "\n    if n == 0:\n        return 0\n    elif n == 1:\n        return", 24),
    ("Once upon a time, in a small village,", " there lived a family of four. They were very happy. They had a lot of money, and they had a lot", 24),
];
