// SPDX-License-Identifier: Apache-2.0

module cbd.example/cbdclient

go 1.19
