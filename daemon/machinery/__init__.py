"""The daemon's process machinery: the only code with side effects.

circus, health checks, cmdStop, process trees and NVML live here.
"""
