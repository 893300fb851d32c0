module cbd.example/cbdclient

go 1.19
