"""A table write's path: the key and value encoded once for the store and the changelog
(`encode_once`), a batch's writes with the partition and sensors looked up once
(`batch_table`), and a windowed table's clock (`window_clock`)."""
