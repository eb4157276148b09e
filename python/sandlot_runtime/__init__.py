"""Python that runs inside sandlot's jail: the zygote (`zygote.py`) and the cell driver (`driver.py`)."""
