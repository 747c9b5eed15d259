"""What every other floor stands on: configuration and placement, the closed sets of names, input
parsing, the error hierarchy, how a commit is sent, and the emulator's rules loading."""
