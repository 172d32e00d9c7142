"""Reading and writing files, carefully.

Every file dmlshim writes goes through :mod:`.files` (one file) or :mod:`.folders` (a whole output
folder), or :mod:`.scratch` (a file in a private temporary folder rewritten in place after every
change); files named by users or by other files are read through :mod:`.reading`. The rest are the formats
built on them: named arrays (:mod:`.array_files`, :mod:`.npz`, :mod:`.polygraphy_json`), external-data
initializers (:mod:`.external_data`) and telling one kind of file from another (:mod:`.filekind`).
"""
