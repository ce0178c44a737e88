build/kvq gen-check -m models/gemma-3-270m-q4_k_m.gguf --n 200 --prompts 4 --json --policies "tcq:2+chscale/tcq:2,sliding=1,sink=1"
