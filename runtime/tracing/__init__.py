"""The user's code as it runs: which files are the user's, which lines ran, the progress the child reports."""
