"""Other APIs' dialects, carried by the one request pipeline (`pipeline.py`): each rewrites a
request in its API's shape into the model's own (OpenAI-style) request on the way in, and the
model's reply into its API's shape on the way out (`way.Way`). Ollama's API is `ollama/`;
llama.cpp's router API is `llamacpp_router.py`.
"""
