package datapath

const sysMemfdCreate = 319
