"""Seams to the operating system and systemd: sd_notify, the journal, logging, the one-agent
lock and the signals the agent ignores.
"""
