"""Python that runs inside sandlot's jail: the zygote and the cell driver."""
