"""The web UI's files (`static/`: plain HTML, CSS and ES-module JavaScript, no build step), served
by `proxy/ui_routes.py` under `/ui/`."""
