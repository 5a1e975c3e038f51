"""How an agent's records and a table's changelog records reach the producer: a batch's
changelog records and output sent together (`batch_changelog`), sends under exactly_once in the
transaction of the record they are made for (`sends`), ``Topic.send`` in one coroutine
(`direct_send`), and Faust's threaded producer beside streamapp's (`threaded_producer`)."""
