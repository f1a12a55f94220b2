"""The web UI's files (`static/`: plain HTML, CSS and ES-module JavaScript, no build step), served
by `proxy/api/ui_routes.py` under `/ui/`."""
