"""Built-in editing methods; every module here registers one or more methods."""
