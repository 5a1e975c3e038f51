"""Keys and values encoded and decoded as Faust's serializer registry does, with the codec
looked up once per table or topic rather than per record (`resolved`, `topic_codecs`,
`json_once`), on Faust's public API (`payloads`)."""
