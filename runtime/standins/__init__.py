"""Stand-ins for the data sets a script downloads (``verify --synthetic-data``): seeded synthetic
data of the real shapes (``synthdata``), torchvision's data sets, transforms and utils, Hugging Face
``load_dataset``, ``torchaudio.datasets`` and ``sklearn.datasets.fetch_*``; ``setup`` installs them in
the child before the script runs."""
