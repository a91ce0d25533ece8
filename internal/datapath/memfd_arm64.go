package datapath

const sysMemfdCreate = 279
