"""The command lines: `xce-controller` and the admin CLI `xcecli`."""
