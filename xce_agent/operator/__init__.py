"""What an operator does with a running agent: the control socket, its verbs, status and stop,
and the commands that render user-data or launch the demo.
"""
