module github.com/switchyard-router/switchyard/examples/plugins/onchange-go

go 1.26

require github.com/switchyard-router/switchyard/sdk/go v0.0.0

replace github.com/switchyard-router/switchyard/sdk/go => ../../../sdk/go
