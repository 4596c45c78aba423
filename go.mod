module github.com/nearstore/nearstore

go 1.26.8
