"""The protocol's timings: what the proxy promises to send, and how long the daemon waits for it.

Both sides import these, so a change to one number moves its partner with it.
"""

from __future__ import annotations

# The proxy sends Hello this often.
HEARTBEAT_S = 1.0
# The proxy casts Activity at most this often per model, plus its edges: idle->busy at once, and
# busy->idle once the model stayed idle IDLE_EDGE_S (proxy/admission.py).
ACTIVITY_INTERVAL_S = 1.0
# Back-to-back requests (one client sending the next as soon as it read an answer) are one busy
# stretch to the daemon: the gap between two of them is never reported as idle, so a swap deciding
# in it does not take the model out under them (docs/swapping.md, "No one client thrashes").
IDLE_EDGE_S = 0.05

# A proxy that sent nothing for this long is gone: its counts no longer hold a TTL or a drain.
SILENT_AFTER = 3 * HEARTBEAT_S
# A daemon that just (re)started has heard from every proxy only after a heartbeat and a half, so a
# drain that early first waits for it (a restarted daemon must not stop a model under a request it
# has not heard of).
HEARTBEAT_GRACE = 1.5 * HEARTBEAT_S
# An Activity report (a request that began, or the idle edge) may reach the daemon up to
# ACTIVITY_INTERVAL_S after the fact, so the TTL does not unload a model this soon after its last
# report or Ready reply: a request the proxy has not reported yet may be under way.
REPORT_GRACE = 1.5 * ACTIVITY_INTERVAL_S
# How long the daemon holds a model for a `Ready` it handed out until the proxy claims it (admits
# the request, or tells it did not): longer than the proxy's wait for its state to catch up with
# a `Ready` (`proxy/pipeline.py`, 1 s), so only a proxy that hangs or lost the reply reaches it.
CLAIM_WITHIN = 5.0
