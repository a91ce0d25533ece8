module github.com/ucxgo/ucx

go 1.24
