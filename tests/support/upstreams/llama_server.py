"""llama.cpp's own HTTP server (`llama-server`, from llama.cpp's tools/server) as a model process.

The `xllamacpp` wheel builds that server code into a Python extension: `xllamacpp.Server(params)`
loads the model and serves llama.cpp's HTTP API (`/health`, `/v1/chat/completions`,
`/v1/completions`, `/completion`, `/slots`, ...) from native threads, the same code and the same
answers as the `llama-server` binary, which has no package here. Its `/health` answers 503
"Loading model" while the model loads, then 200. This script is the command line that binary would
have: `--model PATH --port N [--host 127.0.0.1] [--threads T] [--ctx C] [--slots S]
[--embeddings] [--slot-save-path DIR] [--swa-full]`; it runs until SIGTERM or SIGINT, then
destroys the server (llama.cpp's clean shutdown) and exits 0. A model it cannot load ends it with
exit code 1 and llama.cpp's error (naming the file) on stderr.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llama_server.py", description=__doc__)
    parser.add_argument("--model", "-m", required=True, help="GGUF file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=2048, help="context size, shared by the slots")
    parser.add_argument("--slots", type=int, default=2, help="parallel sequences (llama.cpp -np)")
    parser.add_argument("--alias", default="", help="the model name the server reports")
    parser.add_argument(
        "--chat-template", default="gemma", help="one of llama.cpp's built-in templates"
    )
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="serve embeddings only (llama-server's --embeddings, mean pooling)",
    )
    parser.add_argument(
        "--slot-save-path",
        default="",
        help="the folder of `POST /slots/<id>?action=save|restore` (llama-server's flag)",
    )
    parser.add_argument(
        "--swa-full",
        action="store_true",
        help="a full-size cache for sliding-window attention (llama-server's --swa-full)",
    )
    args = parser.parse_args(argv)

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx
    params.n_parallel = args.slots
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_slots = True
    params.endpoint_metrics = True
    # No warm-up decode at start: starts are what swap tests wait for.
    params.warmup = False
    # llama.cpp's built-in templates (`gemma`) apply only with jinja off (llama-server's default
    # is jinja on, which reads the GGUF's own template).
    params.use_jinja = False
    params.chat_template = args.chat_template
    if args.slot_save_path:
        # llama-server's own flag: it joins each save's and restore's filename to this folder.
        params.slot_save_path = args.slot_save_path.rstrip("/") + "/"
    params.swa_full = args.swa_full
    if args.embeddings:
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    if args.alias:
        params.model_alias = {args.alias}  # a set: a str would be taken as a set of letters
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:
        print(f"llama_server.py: cannot serve {args.model}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"llama_server.py: serving {args.model} on {server.listening_address}", flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main())
