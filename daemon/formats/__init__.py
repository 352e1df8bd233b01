"""Records and their bytes: Avro, keys, envelopes, registry subjects, codecs."""
