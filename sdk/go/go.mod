module github.com/switchyard-router/switchyard/sdk/go

go 1.26
